"""Reference SD 1.x text-to-image pipeline (fp32 PyTorch + numpy), the oracle for
engine/diffusion/pipeline.cpp.

Stages, as the C++ pipeline runs them:
1. Text: CLIP ids padded with EOS to 77 (the tokenizer's EOS id), run causal-only (SD does not mask
   the padding), last hidden state after final_layer_norm. Guidance batch order: [uncond, cond].
2. Initial latents: N(0, 1) from NoiseRng(seed) stream 0 (the counter-based generator documented
   in engine/diffusion/scheduler.h, reimplemented below bit for bit; it fills the engine's NHWC
   latents in order) times sigma_0, rounded to f32.
3. Sampling (k-diffusion form, sd_sampler.py formulas): per step, x_in = f32(x * c_in(sigma)),
   t = f32(sigma_to_t(sigma)), eps from the UNet on the batch [x_in, x_in] with the contexts
   [uncond, cond], guided in f32 as u + scale * (c - u) (one pass with the cond context alone when
   scale == 1), then the sampler update in float64 per element, rounded to f32.
4. VAE decode of the final latents (z / 0.18215 inside the decoder) -> image in [-1, 1].

Image-to-image and inpainting (`sample_euler_image`): the init image (uint8 / 127.5 - 1) is encoded
to the posterior's mean times 0.18215 (the mode, not a sample); of the N-step schedule the last
floor(N * strength + 1e-4) steps run (diffusers' rule, with a margin for float strengths), from init + sigma_first * noise. A pixel mask
(>= 128 = repaint) becomes a latent mask by max-pooling each f x f block (any repainted pixel repaints
the cell). A standard UNet: after every step the kept cells are replaced by init + sigma_next * noise
(the start's noise; the clean init after the last step). An inpainting UNet (2z + 1 input channels):
the UNet input is [x * c_in | latent mask | masked image latents], the masked image being the init with
the repainted pixels set to 0, encoded the same way; no blend.

ControlNet (`Pipeline.control`, sd_controlnet.py): the ControlNet gets the latents' part of the UNet input
(x * c_in, never an inpainting UNet's extra channels), the same t and the same context rows, and the hint
(uint8 RGB / 255, NCHW) on every pass; its residuals times the per-residual scales go into the UNet
(`controlled_unet`). Guess mode: the unconditional row gets no control.

Everything is float32 except the sampler arithmetic (float64 on f32 latents, as the C++ does).
"""

import math

import numpy as np
import torch

from . import sd_sampler

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _mix(z):
    z &= _MASK
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return z


def noise_rng(seed, stream, n):
    """NoiseRng(seed).fill(stream, out, n) of engine/diffusion/scheduler.h, as float32."""
    key = _mix(seed + _GAMMA)
    out = np.empty(n, dtype=np.float64)
    for j in range((n + 1) // 2):
        c = (stream << 40) + j
        b1 = _mix(key ^ _mix(2 * c + 1))
        b2 = _mix(key ^ _mix(2 * c + 2))
        u1 = ((b1 >> 11) + 1) * 2.0 ** -53
        u2 = (b2 >> 11) * 2.0 ** -53
        r = math.sqrt(-2.0 * math.log(u1))
        out[2 * j] = r * math.cos(2.0 * math.pi * u2)
        if 2 * j + 1 < n:
            out[2 * j + 1] = r * math.sin(2.0 * math.pi * u2)
    return out.astype(np.float32)


def pad_ids(ids, length, eos_id):
    """[BOS, ..., EOS] cut to `length` keeping EOS last, padded with EOS (SD's padding)."""
    if len(ids) > length:
        ids = ids[: length - 1] + [ids[-1]]
    return ids + [eos_id] * (length - len(ids))


def latent_mask(mask_u8, f):
    """uint8 mask [H, W] (>= 128 = repaint) -> float32 [1, 1, H/f, W/f]: 1 where any pixel of the f x f
    block repaints."""
    m = torch.from_numpy((np.asarray(mask_u8) >= 128).astype(np.float32))[None, None]
    return torch.nn.functional.max_pool2d(m, f).numpy()


class Pipeline:
    """unet: sd_unet.UNet, vae: sd_vae.VaeDecoder, clip: clip_text.ClipTextModel (all eval, fp32);
    encoder: sd_vae.VaeEncoder (image-to-image only)."""

    def __init__(self, unet, vae, clip, encoder=None):
        self.unet, self.vae, self.clip, self.encoder = unet, vae, clip, encoder
        self.sched = sd_sampler.Schedule()
        self.extra = None  # an inpainting UNet's [mask | masked image latents], NCHW f32
        self.control = None  # (ControlNet, hint [1, 3, H, W] in [0, 1], 13 scales, guess mode)

    def unet_eps(self, x_in, t, context):
        """The UNet (with the ControlNet's residuals when self.control is set) on a batch: x_in
        [B, C, h, w] (latents, plus an inpainting UNet's extra channels), t [B], context [B, L, D]."""
        if self.control is None:
            return self.unet(x_in, t, context)
        from .sd_controlnet import controlled_unet
        net, hint, scales, guess = self.control
        z = net.input_blocks[0][0].in_channels
        res = net(x_in[:, :z], hint.repeat(x_in.shape[0], 1, 1, 1), t, context)
        if guess and x_in.shape[0] == 2:
            keep = torch.tensor([0.0, 1.0]).reshape(2, 1, 1, 1)
            res = [r * keep for r in res]
        return controlled_unet(self.unet, x_in, t, context, res, scales)

    @torch.no_grad()
    def encode_image(self, rgb_u8):
        """uint8 [H, W, 3] -> the UNet's latents [1, z, H/f, W/f] (0.18215 * the posterior's mean)."""
        x = torch.from_numpy(np.asarray(rgb_u8, np.float32)).permute(2, 0, 1)[None] / np.float32(127.5) - 1
        return self.encoder(x).numpy()

    @torch.no_grad()
    def encode(self, ids_rows):
        """ids_rows: list of padded id lists -> context [len(rows), 77, width] (causal only)."""
        return self.clip(torch.tensor(ids_rows, dtype=torch.long))

    @torch.no_grad()
    def eps(self, x, sigma, context, guidance):
        """Guided epsilon for f32 latents x [1, C, h, w]; context [2, L, D] = [uncond, cond]."""
        x_in = torch.from_numpy((x.astype(np.float64) * sd_sampler.c_in(sigma)).astype(np.float32))
        if self.extra is not None:
            x_in = torch.cat([x_in, torch.from_numpy(self.extra)], dim=1)
        t = float(np.float32(self.sched.sigma_to_t(sigma)))
        if guidance == 1.0:
            return self.unet_eps(x_in, torch.tensor([t]), context[1:2]).numpy()
        out = self.unet_eps(x_in.repeat(2, 1, 1, 1), torch.tensor([t, t]), context).numpy()
        u, c = out[0:1], out[1:2]
        return (u + np.float32(guidance) * (c - u)).astype(np.float32)

    @torch.no_grad()
    def sample_euler(self, context, noise, steps, guidance):
        """Euler over the "normal" schedule from f32 N(0,1) noise [1, C, h, w]. Returns the sigmas,
        the timesteps, the f32 latents after each step and the decoded image [1, 3, H, W]."""
        sigmas = self.sched.normal(steps)
        x = (noise.astype(np.float64) * sigmas[0]).astype(np.float32)
        latents = []
        for i in range(steps):
            s, sn = sigmas[i], sigmas[i + 1]
            e = self.eps(x, s, context, guidance).astype(np.float64)
            # denoised = x - s * eps, so the Euler derivative (x - denoised) / s is eps itself.
            x = (x.astype(np.float64) + e * (sn - s)).astype(np.float32)
            latents.append(x.copy())
        image = self.vae(torch.from_numpy(x)).numpy()
        timesteps = [self.sched.sigma_to_t(s) for s in sigmas[:-1]]
        return sigmas, timesteps, latents, image

    @torch.no_grad()
    def sample_euler_image(self, context, noise, steps, guidance, rgb_u8, strength, mask_u8=None):
        """Image-to-image / inpainting with Euler (see the module docstring). Returns the first step
        that runs, the f32 latents after each step run and the decoded image."""
        init = self.encode_image(rgb_u8)
        z = init.shape[1]
        f = rgb_u8.shape[0] // init.shape[2]
        lmask = None if mask_u8 is None else latent_mask(mask_u8, f)
        self.extra = None
        if self.unet.input_blocks[0][0].in_channels != z:
            masked = np.array(rgb_u8, np.float32)
            if mask_u8 is None:
                masked[:] = 127.5  # (v / 127.5 - 1) = 0: grey
                m = np.ones((1, 1) + init.shape[2:], np.float32)
            else:
                masked[np.asarray(mask_u8) >= 128] = 127.5
                m = lmask
            self.extra = np.concatenate([m, self.encode_image(masked)], axis=1).astype(np.float32)
        sigmas = self.sched.normal(steps)
        run = int(math.floor(steps * strength + 1e-4))  # the engine's kStrengthMargin
        first = steps - run
        x = (init.astype(np.float64) + noise.astype(np.float64) * sigmas[first]).astype(np.float32)
        latents = []
        for i in range(first, steps):
            s, sn = sigmas[i], sigmas[i + 1]
            e = self.eps(x, s, context, guidance).astype(np.float64)
            x = (x.astype(np.float64) + e * (sn - s)).astype(np.float32)
            if lmask is not None and self.extra is None:
                known = (init.astype(np.float64) + sn * noise.astype(np.float64)).astype(np.float32)
                x = np.where(lmask > 0, x, known).astype(np.float32)
            latents.append(x.copy())
        self.extra = None
        image = self.vae(torch.from_numpy(x)).numpy()
        return first, latents, image

    @torch.no_grad()
    def sample_lcm_image(self, context, noise, steps, guidance, seed, rgb_u8, strength):
        """LCM image-to-image (sd_sampler.sample_lcm's DDPM form with this UNet): timesteps
        lcm_timesteps(steps, strength), start init + sigma_t0 * noise, fresh noise per step i from
        NoiseRng(seed) stream i + 1 (NHWC order, as the engine). Returns the final latents and image."""
        init = self.encode_image(rgb_u8)
        ts = sd_sampler.lcm_timesteps(steps, strength)
        sig = self.sched.sigmas
        x = (init.astype(np.float64) + noise.astype(np.float64) * sig[ts[0]]).astype(np.float32)
        shape = x.shape
        noises = [noise_rng(seed, i + 1, x.size).reshape(shape[0], shape[2], shape[3], shape[1])
                  .transpose(0, 3, 1, 2) for i in range(steps)]

        def model(x_t, t):
            x_in = torch.from_numpy(np.asarray(x_t, np.float32))
            if guidance == 1.0:
                return self.unet_eps(x_in, torch.tensor([t], dtype=torch.float32), context[1:2]).numpy()
            out = self.unet_eps(x_in.repeat(2, 1, 1, 1), torch.tensor([t, t], dtype=torch.float32),
                                context).numpy()
            u, c = out[0:1], out[1:2]
            return (u + np.float32(guidance) * (c - u)).astype(np.float32)

        traj = sd_sampler.sample_lcm(model, self.sched, x.astype(np.float64), ts, noises)
        x = traj[-1].astype(np.float32)
        return ts, x, self.vae(torch.from_numpy(x)).numpy()
