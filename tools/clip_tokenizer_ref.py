#!/usr/bin/env python3
"""A standard-library reimplementation of CLIP's tokenizer (openai/CLIP simple_tokenizer.py), the
oracle the C++ ClipTokenizer is tested against.

It follows simple_tokenizer.py line by line except where CLIP uses packages the project does not
have: ftfy.fix_text is skipped (as in the C++), and the `regex` pattern
    <\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+
(IGNORECASE) is matched by hand with unicodedata categories; \\s is the White_Space property, as in
the regex module. html.unescape and str.lower are Python's own.

    /usr/bin/python3 tools/clip_tokenizer_ref.py encode "a photo of a cat"
    /usr/bin/python3 tools/clip_tokenizer_ref.py fixtures > tests/fixtures/clip/expected_ids.json
    /usr/bin/python3 tools/clip_tokenizer_ref.py export-hf OUT_DIR   # vocab.json + merges.txt
"""
import argparse
import gzip
import html
import json
import os
import random
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VOCAB = os.path.join(REPO, "assets", "vocab", "clip", "bpe_simple_vocab_16e6.txt.gz")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


def is_white_space(c):
    # The regex module's \s (White_Space): str.isspace() minus U+001C..U+001F.
    return c.isspace() and not ("\x1c" <= c <= "\x1f")


def is_letter(c):
    return unicodedata.category(c)[0] == "L"


def is_number(c):
    return unicodedata.category(c)[0] == "N"


def is_symbol(c):
    """[^\\s\\p{L}\\p{N}] under IGNORECASE: the regex module rejects c when a case variant of it
    is a letter or number (U+0345, whose upper case is a Greek capital iota)."""
    if is_white_space(c) or is_letter(c) or is_number(c):
        return False
    for f in (str.lower, str.upper, str.casefold, str.title):
        v = f(c)
        if len(v) == 1 and v != c and unicodedata.category(v)[0] in "LN":
            return False
    return True


def basic_clean(text):
    # ftfy.fix_text(text) is skipped: ftfy is not available (see clip_tokenizer.h).
    text = html.unescape(html.unescape(text))
    return text.strip()


def whitespace_clean(text):
    out = []
    i = 0
    while i < len(text):
        if is_white_space(text[i]):
            out.append(" ")
            while i < len(text) and is_white_space(text[i]):
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out).strip()


def _literal_at(text, i, lit):
    # IGNORECASE literal match: equal after str.casefold() of single characters (so U+017F, long
    # s, matches 's' as in the regex module).
    if len(text) - i < len(lit):
        return False
    for k, p in enumerate(lit):
        c = text[i + k]
        if c != p and c.casefold() != p:
            return False
    return True


LITERALS = ["<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def findall(text):
    """regex.findall(CLIP's pattern, text), written out."""
    pieces = []
    i = 0
    n = len(text)
    while i < n:
        length = 0
        for lit in LITERALS:
            if _literal_at(text, i, lit):
                length = len(lit)
                break
        if not length:
            c = text[i]
            if is_letter(c):
                length = 1
                while i + length < n and is_letter(text[i + length]):
                    length += 1
            elif is_number(c):
                length = 1
            elif is_symbol(c):
                length = 1
                while i + length < n and is_symbol(text[i + length]):
                    length += 1
        if not length:
            i += 1
            continue
        pieces.append(text[i:i + length])
        i += length
    return pieces


class SimpleTokenizer:
    def __init__(self, bpe_path=DEFAULT_VOCAB):
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {v: k for k, v in self.byte_encoder.items()}
        merges = gzip.open(bpe_path).read().decode("utf-8").split("\n")
        merges = merges[1:49152 - 256 - 2 + 1]
        merges = [tuple(merge.split()) for merge in merges]
        vocab = list(bytes_to_unicode().values())
        vocab = vocab + [v + "</w>" for v in vocab]
        for merge in merges:
            vocab.append("".join(merge))
        vocab.extend(["<|startoftext|>", "<|endoftext|>"])
        self.merges = merges
        self.encoder = dict(zip(vocab, range(len(vocab))))
        self.decoder = {v: k for k, v in self.encoder.items()}
        self.bpe_ranks = dict(zip(merges, range(len(merges))))
        self.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token[:-1]) + (token[-1] + "</w>",)
        pairs = get_pairs(word)
        if not pairs:
            return token + "</w>"
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = " ".join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        """Ids of `text` without BOS/EOS, as CLIP's encode()."""
        bpe_tokens = []
        text = whitespace_clean(basic_clean(text)).lower()
        for token in findall(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return bpe_tokens

    def encode_with_specials(self, text):
        return [self.encoder["<|startoftext|>"]] + self.encode(text) + [self.encoder["<|endoftext|>"]]

    def decode(self, tokens):
        text = "".join(self.decoder[t] for t in tokens)
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace") \
            .replace("</w>", " ")


# ---- fixtures ----------------------------------------------------------------------------------

HAND_WRITTEN = [
    "a photo of a cat",
    "",
    "   ",
    "A Photo Of A CAT",
    "a red sports car, highly detailed, 4k, octane render",
    "1234",
    "3.14159 and 2,718",
    "it's", "don't", "I'm here, you're there, we've gone, they'll see, he'd go",
    "IT'S DON'T WE'LL",
    "rock'n'roll", "''s", "'S", "'ſx",
    "café", "naïve", "Crème brûlée", "smörgåsbord", "façade", "jalapeño",
    "東京タワー", "中文提示词：一只可爱的猫", "한국어 프롬프트", "日本語とEnglishの混在",
    "🐱", "a cat 🐱 on a 🛹", "👨‍👩‍👧‍👦 family", "🇫🇷 flag", "❤️🔥",
    "multiple   spaces", "tabs\there\tand\tthere", "new\nlines\r\nand\rreturns",
    "  leading and trailing  ", "\u00a0non-breaking\u00a0space\u2003em space\u3000ideographic",
    "information\x1cseparator\x1fhere", "\x1cstripped at the ends\x1f",
    "&amp; &lt;b&gt; &quot;quoted&quot; &apos;apos&apos; a&nbsp;b",
    "&#65;&#x42;&#X43; &#128512; &#0; &#x110000; &#xD800; &#128;",
    "&amp;amp; double escaped &amp;lt;tag&amp;gt;", "&ampx &notit; &notin; &unknown; &", "AT&T, R&D",
    "&#", "&#x", "&;", "&&amp;",
    "ΟΔΟΣ ΣΟΦΟΣ", "Σ", "ΑΣ.", "İstanbul", "STRASSE Straße ẞ", "ǅ ǈ ǋ",
    "<|startoftext|>", "<|endoftext|>", "text <|endoftext|> more", "<|ſtartoftext|>",
    "!!<|endoftext|>", "hello!!! ??? ...", "c++ and c# and f#", "user@example.com",
    "https://example.com/path?query=1&b=2", "#hashtag @mention $100 50% ^_^",
    "(parentheses) [brackets] {braces} <angles>", "snake_case_name and kebab-case-name",
    "tiny house, isometric, low poly, 3d render",
    "a wooden chair with four legs and a curved backrest",
    "٣ arabic-indic digit, ½ fraction, Ⅻ roman, ² superscript",
    "Ελληνικά κείμενα", "Русский текст", "עברית", "العربية", "हिन्दी", "ไทย",
    "zero\u200bwidth", "soft\u00adhyphen", "combining e\u0301 accent",
    "\u0345 ypogegrammeni", "K kelvin Å angstrom",
    "a" * 100, "aaaaab" * 20, "ab" * 50 + "!", "1" * 30, "🐱" * 20,
    "supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "A photo of a dog.A photo of a cat.", "it ' s", "it’s curly quotes “like this”",
    "ｆｕｌｌｗｉｄｔｈ", "ﬁ ligature",
]

WORDS = ["cat", "dog", "house", "tree", "castle", "dragon", "robot", "chair", "lamp", "sword",
         "medieval", "futuristic", "ancient", "blue", "Red", "GREEN", "low-poly", "voxel",
         "photorealistic", "octane", "render", "unreal", "engine", "isometric", "cute", "a", "the",
         "of", "with", "and", "on", "in", "Stable", "Diffusion", "Cube", "mesh", "texture"]
EXTRAS = ["café", "東京", "🐱", "🌲", "42", "1999", "it's", "don't", "&amp;", "&lt;3", "&#9731;",
          "!!", "...", ",", ";", ":", "-", "—", "(", ")", "\"", "'", "ΣΑΣ", "İ", "ß", "ǅ", "ſ",
          "\t", "\n", "  ", "\u00a0", "\u3000", "x²", "½", "٣", "naïve", "Ünïcödé", "ℌ𝔢𝔩𝔩𝔬",
          "<|endoftext|>", "\x1c", "k\u0301", "𝟘𝟙"]


def random_prompts(count, seed):
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 14)):
            parts.append(rng.choice(WORDS) if rng.random() < 0.65 else rng.choice(EXTRAS))
            parts.append(rng.choice([" ", " ", " ", "", ", ", "  "]))
        prompts.append("".join(parts))
    # Random code points, to exercise the character classes across planes.
    for _ in range(20):
        chars = []
        for _ in range(rng.randint(1, 24)):
            while True:
                cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                                 rng.randint(0x3000, 0xFFFF), rng.randint(0x10000, 0x1FFFF)])
                if not 0xD800 <= cp <= 0xDFFF:
                    break
            chars.append(chr(cp))
        prompts.append("".join(chars))
    return prompts


# Raw byte strings (invalid UTF-8); Python decodes them with errors="replace" before encoding.
INVALID_UTF8 = [b"\xff", b"caf\xe9", b"\xc3\x28 x", b"\xe2\x82", b"\xf0\x9f\x98", b"a\xed\xa0\x80b",
                b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 too big", b"ok \x80\x80\x80 ok"]


def make_fixtures(tok, vocab_label):
    cases = []
    for text in HAND_WRITTEN + random_prompts(110, seed=1234):
        cases.append({"text": text, "ids": tok.encode_with_specials(text)})
    for raw in INVALID_UTF8:
        text = raw.decode("utf-8", errors="replace")
        cases.append({"bytes_hex": raw.hex(), "ids": tok.encode_with_specials(text)})
    return {"generator": "tools/clip_tokenizer_ref.py fixtures", "vocab": vocab_label,
            "python": sys.version.split()[0], "unicode": unicodedata.unidata_version,
            "note": "ids include BOS 49406 and EOS 49407; ftfy is not applied",
            "cases": cases}


def export_hf(tok, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(tok.encoder, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in tok.merges:
            f.write(f"{a} {b}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", default=DEFAULT_VOCAB, help="bpe_simple_vocab_16e6.txt.gz")
    sub = parser.add_subparsers(dest="cmd", required=True)
    enc = sub.add_parser("encode", help="print ids (with BOS/EOS) of each TEXT")
    enc.add_argument("text", nargs="+")
    sub.add_parser("fixtures", help="print the expected-ids fixture JSON")
    exp = sub.add_parser("export-hf", help="write vocab.json + merges.txt to a directory")
    exp.add_argument("out_dir")
    args = parser.parse_args()
    tok = SimpleTokenizer(args.vocab)
    if args.cmd == "encode":
        for text in args.text:
            print(" ".join(str(i) for i in tok.encode_with_specials(text)))
    elif args.cmd == "fixtures":
        label = os.path.relpath(args.vocab, REPO) if args.vocab == DEFAULT_VOCAB else args.vocab
        json.dump(make_fixtures(tok, label), sys.stdout, indent=None, ensure_ascii=True)
        sys.stdout.write("\n")
    else:
        export_hf(tok, args.out_dir)


if __name__ == "__main__":
    main()
