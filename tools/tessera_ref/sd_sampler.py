"""Reference Stable Diffusion samplers in the k-diffusion form (numpy, float64).

The oracle for engine/diffusion/scheduler.cpp. Written from the k-diffusion formulas
(Karras et al. 2022, "Elucidating the Design Space of Diffusion-Based Generative Models";
Lu et al. 2022, "DPM-Solver++"; k-diffusion's DiscreteEpsDDPMDenoiser / sampling.py):

- Training noise levels: SD's "scaled linear" betas, beta_i = linspace(sqrt(0.00085), sqrt(0.012),
  1000)_i ** 2, alphas_cumprod = cumprod(1 - beta), sigma_i = sqrt((1 - acp_i) / acp_i).
- "normal" (discrete) schedule for n steps: t = linspace(999, 0, n), sigma(t) by linear
  interpolation of log sigma between the neighbouring integer timesteps, then a final 0 (n + 1
  values).
- Karras schedule (rho = 7): (s_max^(1/rho) + r (s_min^(1/rho) - s_max^(1/rho)))^rho with
  r = linspace(0, 1, n), then a final 0; s_min / s_max are the smallest / largest training sigmas.
- sigma -> t: linear interpolation in log sigma over the 1000 training sigmas (k-diffusion
  sigma_to_t, unquantized; clamped to [0, 999]).
- Model call (epsilon prediction): eps = model(x * c_in, t(sigma)), c_in = 1 / sqrt(sigma^2 + 1),
  denoised = x - sigma * eps.
- Euler: x += (x - denoised) / sigma * (sigma_next - sigma).
- Euler ancestral (eta 1): sigma_up = min(sigma_next, sqrt(sigma_next^2 (sigma^2 - sigma_next^2) /
  sigma^2)), sigma_down = sqrt(sigma_next^2 - sigma_up^2); x += d (sigma_down - sigma), then
  x += noise * sigma_up when sigma_next > 0.
- DPM++ 2M: lambda = -log sigma, h = lambda_next - lambda; first step (and the step to sigma 0):
  x = (sigma_next / sigma) x - expm1(-h) denoised; otherwise r = h_last / h and denoised is replaced
  by (1 + 1/(2r)) denoised - 1/(2r) denoised_prev.
"""

import numpy as np

TRAIN_STEPS = 1000
BETA_START = 0.00085
BETA_END = 0.012
KARRAS_RHO = 7.0


def training_sigmas(beta_start=BETA_START, beta_end=BETA_END, n=TRAIN_STEPS):
    betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, n, dtype=np.float64) ** 2
    acp = np.cumprod(1.0 - betas)
    return np.sqrt((1.0 - acp) / acp)


class Schedule:
    def __init__(self, sigmas=None):
        self.sigmas = training_sigmas() if sigmas is None else np.asarray(sigmas, np.float64)
        self.log_sigmas = np.log(self.sigmas)

    @property
    def sigma_min(self):
        return float(self.sigmas[0])

    @property
    def sigma_max(self):
        return float(self.sigmas[-1])

    def t_to_sigma(self, t):
        t = float(t)
        lo = int(np.floor(t))
        hi = int(np.ceil(t))
        w = t - lo
        return float(np.exp((1.0 - w) * self.log_sigmas[lo] + w * self.log_sigmas[hi]))

    def sigma_to_t(self, sigma):
        ls = np.log(sigma)
        # Index of the last training log-sigma <= log(sigma), clamped to [0, n - 2].
        count = int(np.sum(self.log_sigmas <= ls))
        lo = min(max(count - 1, 0), len(self.sigmas) - 2)
        low, high = self.log_sigmas[lo], self.log_sigmas[lo + 1]
        w = min(max((low - ls) / (low - high), 0.0), 1.0)
        return float((1.0 - w) * lo + w * (lo + 1))

    def normal(self, n):
        ts = np.linspace(len(self.sigmas) - 1, 0, n)
        return np.array([self.t_to_sigma(t) for t in ts] + [0.0])

    def karras(self, n, rho=KARRAS_RHO):
        ramp = np.linspace(0.0, 1.0, n)
        lo, hi = self.sigma_min ** (1.0 / rho), self.sigma_max ** (1.0 / rho)
        return np.concatenate([(hi + ramp * (lo - hi)) ** rho, [0.0]])


def c_in(sigma):
    return 1.0 / np.sqrt(sigma * sigma + 1.0)


def denoise(model, sched, x, sigma):
    eps = model(x * c_in(sigma), sched.sigma_to_t(sigma))
    return x - sigma * eps


def sample_euler(model, sched, x, sigmas):
    traj = []
    for i in range(len(sigmas) - 1):
        s, sn = sigmas[i], sigmas[i + 1]
        d = (x - denoise(model, sched, x, s)) / s
        x = x + d * (sn - s)
        traj.append(x.copy())
    return traj


def ancestral_step(s, sn, eta=1.0):
    if sn == 0.0:
        return 0.0, 0.0
    up = min(sn, eta * np.sqrt(sn * sn * (s * s - sn * sn) / (s * s)))
    return float(np.sqrt(sn * sn - up * up)), float(up)


def sample_euler_ancestral(model, sched, x, sigmas, noises):
    traj = []
    for i in range(len(sigmas) - 1):
        s, sn = sigmas[i], sigmas[i + 1]
        down, up = ancestral_step(s, sn)
        d = (x - denoise(model, sched, x, s)) / s
        x = x + d * (down - s)
        if sn > 0:
            x = x + noises[i] * up
        traj.append(x.copy())
    return traj


def sample_dpmpp_2m(model, sched, x, sigmas):
    traj = []
    old = None
    for i in range(len(sigmas) - 1):
        s, sn = sigmas[i], sigmas[i + 1]
        den = denoise(model, sched, x, s)
        if sn == 0.0:
            x = den  # the limit of the update as sigma_next -> 0
        else:
            t, tn = -np.log(s), -np.log(sn)
            h = tn - t
            if old is None:
                dd = den
            else:
                r = (t - (-np.log(sigmas[i - 1]))) / h
                dd = (1.0 + 1.0 / (2.0 * r)) * den - (1.0 / (2.0 * r)) * old
            x = (sn / s) * x - np.expm1(-h) * dd
        old = den
        traj.append(x.copy())
    return traj


# ---- LCM (latent consistency models; diffusers LCMScheduler, defaults) ----------------------------------

LCM_ORIGINAL_STEPS = 50
LCM_TIMESTEP_SCALING = 10.0
LCM_SIGMA_DATA = 0.5


def lcm_timesteps(n, strength=1.0, train_steps=TRAIN_STEPS, original=LCM_ORIGINAL_STEPS):
    """The n integer timesteps of an LCM run: the origin schedule k, 2k, ... (k = train_steps // original)
    minus 1, its first int(original * strength) entries (image-to-image keeps the low-noise end), reversed,
    at indices floor(linspace(0, L, n, endpoint=False))."""
    k = train_steps // original
    origin = (np.arange(1, int(np.floor(original * strength + 1e-4)) + 1) * k - 1)[::-1]
    idx = np.floor(np.linspace(0, len(origin), n, endpoint=False)).astype(np.int64)
    return [int(origin[i]) for i in idx]


def lcm_boundary(t):
    """(c_skip, c_out) of the consistency parametrisation at timestep t."""
    u = LCM_TIMESTEP_SCALING * t
    return LCM_SIGMA_DATA ** 2 / (u * u + LCM_SIGMA_DATA ** 2), u / np.sqrt(u * u + LCM_SIGMA_DATA ** 2)


def sample_lcm(model, sched, x, timesteps, noises):
    """LCM in diffusers' DDPM form (x_t = sqrt(abar) x0 + sqrt(1 - abar) eps; the model sees x_t), started
    and reported in the k-diffusion scaling the other samplers use (x_kd = x_t / sqrt(abar), so x_kd * c_in
    = x_t): per step x0 = (x_t - sqrt(1 - abar) eps) / sqrt(abar), denoised = c_out x0 + c_skip x_t, then
    x_t' = sqrt(abar') denoised + sqrt(1 - abar') noise (the last step returns denoised). model(x_in, t)
    is called with the integer timestep."""
    abar = 1.0 / (1.0 + sched.sigmas ** 2)
    x_t = x * np.sqrt(abar[timesteps[0]])
    traj = []
    for i, t in enumerate(timesteps):
        a = abar[t]
        eps = model(x_t, float(t))
        x0 = (x_t - np.sqrt(1.0 - a) * eps) / np.sqrt(a)
        c_skip, c_out = lcm_boundary(t)
        den = c_out * x0 + c_skip * x_t
        if i + 1 < len(timesteps):
            an = abar[timesteps[i + 1]]
            x_t = np.sqrt(an) * den + np.sqrt(1.0 - an) * noises[i]
            traj.append(x_t / np.sqrt(an))
        else:
            x_t = den
            traj.append(den.copy())
    return traj
