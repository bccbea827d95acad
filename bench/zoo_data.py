"""Evaluation and calibration data for the zoo, all from files that installed packages ship.

- images: crops of scikit-learn's two sample photos (china.jpg, flower.jpg) and matplotlib's
  grace_hopper.jpg, ImageNet-normalized;
- faces: crops around the face in grace_hopper.jpg (label 1) and crops of scenes without a face
  (label 0), in MTCNN's pixel scaling;
- digits: scikit-learn's 8x8 handwritten digits, the fixed train/test split of examples/digits;
- sentences: short English sentences written here, tokenized by the MiniLM package's tokenizer;
- audio: synthetic voiced/unvoiced/silent clips (no speech recording ships with any installed
  package), so audio models are compared against float only; harmonic tones of known pitch for
  the pitch tracker, and 40-band mel power spectrograms of the clips for the speaker encoder.

Every function is deterministic in its `seed`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "image_crops",
    "face_crops",
    "digits_split",
    "SENTENCES",
    "audio_clips",
    "pitch_frames",
    "mel_frames",
    "tone_keywords",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# grace_hopper.jpg is 512x600; her face spans about x 160..370, y 140..360.
_FACE_BOX = (160, 140, 370, 360)


@lru_cache(maxsize=None)
def _photos() -> dict[str, np.ndarray]:
    from matplotlib import cbook
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = dict(zip(("china", "flower"), load_sample_images().images))
    with Image.open(cbook.get_sample_data("grace_hopper.jpg")) as im:
        photos["grace_hopper"] = np.asarray(im.convert("RGB"))
    return photos


def _resize(crop: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(crop).resize((size, size), Image.BILINEAR), np.float32)


def image_crops(count: int, size: int, seed: int, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> np.ndarray:
    """[count, 3, size, size] float32 crops of real photos (random position and scale)."""
    rng = np.random.default_rng(seed)
    photos = list(_photos().values())
    out = np.empty((count, 3, size, size), np.float32)
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w, _ = photo.shape
        side = int(rng.uniform(0.4, 1.0) * min(h, w))
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        rgb = _resize(photo[y : y + side, x : x + side], size) / 255.0
        out[i] = ((rgb - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).transpose(2, 0, 1)
    return out


def face_crops(count: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Half crops of a face (jittered box), half crops without one; MTCNN scaling (x-127.5)/128.
    Returns ([count, 3, size, size] float32, labels int64: 1 face, 0 no face)."""
    rng = np.random.default_rng(seed)
    photos = _photos()
    x0, y0, x1, y1 = _FACE_BOX
    out = np.empty((count, 3, size, size), np.float32)
    labels = np.zeros(count, np.int64)
    for i in range(count):
        if i % 2 == 0:
            side = int((x1 - x0) * rng.uniform(0.9, 1.15))
            cx = (x0 + x1) / 2 + rng.uniform(-0.06, 0.06) * side
            cy = (y0 + y1) / 2 + rng.uniform(-0.06, 0.06) * side
            top, left = int(cy - side / 2), int(cx - side / 2)
            crop = photos["grace_hopper"][top : top + side, left : left + side]
            labels[i] = 1
        else:
            name = ("china", "flower", "grace_hopper")[(i // 2) % 3]
            photo = photos[name]
            h, w, _ = photo.shape
            side = int(rng.uniform(0.15, 0.5) * min(h, w))
            if name == "grace_hopper":  # a side no clear strip can hold would never be placed
                side = min(side, max(h - y1 - 2, x0 - 1, w - x1 - 2))
            while True:  # in grace_hopper.jpg, stay clear of the face
                top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
                if name != "grace_hopper" or top > y1 or left + side < x0 or left > x1:
                    break
            crop = photo[top : top + side, left : left + side]
        out[i] = ((_resize(crop, size) - 127.5) / 128.0).transpose(2, 0, 1)
    return out, labels


@lru_cache(maxsize=None)
def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits as [N, 8, 8] float32 in [0, 1]: (x_train, y_train, x_test, y_test),
    a fixed shuffled split (1437 train, 360 test)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return x[:1437], y[:1437], x[1437:], y[1437:]


SENTENCES = (
    "The train to the airport leaves every twenty minutes.",
    "She planted tomatoes and basil in the garden this spring.",
    "How do I reset the password on my phone?",
    "The central bank raised interest rates by a quarter point.",
    "A small dog was barking at the mail carrier.",
    "Our flight was delayed because of the snow storm.",
    "Please send me the quarterly sales report by Friday.",
    "The recipe calls for two cups of flour and one egg.",
    "He scored the winning goal in the last minute of the match.",
    "The museum is closed on Mondays and public holidays.",
    "Battery life on this laptop is about ten hours.",
    "The children built a sandcastle near the water.",
    "What time does the pharmacy open tomorrow morning?",
    "The river flooded the fields after a week of rain.",
    "Researchers found a new species of frog in the rainforest.",
    "I would like a coffee with oat milk, please.",
    "The orchestra played a symphony by Beethoven.",
    "Turn left at the second traffic light and park behind the bank.",
    "The software update fixed the crash when saving files.",
    "Cats sleep for most of the day.",
    "The hotel room had a view over the harbour.",
    "Stock markets fell sharply after the announcement.",
    "My grandmother knits scarves for the whole family.",
    "The bridge will be closed for repairs until June.",
    "Can you recommend a good book about the history of Rome?",
    "The volcano erupted for the first time in a century.",
    "Wash your hands before preparing food.",
    "The startup raised money to build electric bicycles.",
    "A thunderstorm knocked out power in the whole town.",
    "The teacher asked the students to read the first chapter.",
    "Fresh bread smells wonderful in the morning.",
    "The telescope captured images of a distant galaxy.",
    "We hiked to the top of the mountain before sunrise.",
    "The printer on the third floor is out of paper again.",
    "He learned to play the guitar during the summer holidays.",
    "The new law takes effect at the start of next year.",
    "Penguins live mostly in the southern hemisphere.",
    "The restaurant serves vegetarian dishes on weekends.",
    "My package was delivered to the wrong address.",
    "The doctor advised him to walk thirty minutes a day.",
    "The city opened a new library downtown.",
    "She translated the letter from Spanish into English.",
    "The game was cancelled because the pitch was flooded.",
    "Solar panels on the roof cover most of our electricity.",
    "The puppy chewed through the charging cable.",
    "A long queue formed outside the concert hall.",
    "The spacecraft landed safely on the surface of the moon.",
    "Remember to water the plants while I am away.",
)


def audio_clips(count: int, samples: int, seed: int, rate: int = 16000) -> np.ndarray:
    """[count, samples] float32 in [-1, 1]: voiced harmonic sounds with a moving formant, noise
    bursts, and near-silence, in turn."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    out = np.empty((count, samples), np.float32)
    for i in range(count):
        kind = i % 3
        if kind == 0:
            f0 = rng.uniform(90, 260) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(2, 6) * t))
            phase = 2 * np.pi * np.cumsum(f0) / rate
            formant = rng.uniform(400, 1200)
            x = sum(np.sin(k * phase) / k * np.exp(-(((k * f0) - formant) ** 2) / (2 * 400.0**2)) for k in range(1, 30))
            x = x / (np.abs(x).max() + 1e-6) * rng.uniform(0.2, 0.8)
        elif kind == 1:
            x = rng.normal(0, rng.uniform(0.05, 0.3), samples)
        else:
            x = rng.normal(0, 1e-3, samples)
        out[i] = np.clip(x, -1, 1)
    return out


def tone_keywords(count: int, seed: int, frames: int = 49, bins: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """A 4-word synthetic keyword task on log-spectrogram-like [count, 1, frames, bins] inputs:
    rising, falling, steady and two-tone patterns at random pitch and level, plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.3, (count, 1, frames, bins)).astype(np.float32)
    labels = np.arange(count) % 4
    f = np.arange(frames)
    for i, label in enumerate(labels):
        start, level = rng.uniform(5, bins - 5), rng.uniform(1.5, 3.0)
        slope = rng.uniform(0.2, 0.5)
        track = {
            0: start - 15 + slope * f,
            1: start + 15 - slope * f,
            2: np.full(frames, start),
            3: np.where(f % 12 < 6, start - 6, start + 6),
        }[int(label)]
        on = (f > rng.integers(0, 10)) & (f < frames - rng.integers(0, 10))
        for j in np.nonzero(on)[0]:
            centre = track[j]
            x[i, 0, j] += level * np.exp(-((np.arange(bins) - centre) ** 2) / 4.0)
    return x, labels.astype(np.int64)


# CREPE's 360 output bins: 20 cents apart, the first at this many cents above 10 Hz
CREPE_FIRST_BIN_CENTS = 1997.3794084376191


def pitch_frames(count: int, seed: int, rate: int = 16000, length: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """([count, length] float32 frames, each zero-mean and unit-variance as CREPE reads them; the
    pitch bin of each frame's fundamental): harmonic tones at 60-1000 Hz with random harmonic
    weights, phase and a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / rate
    frames = np.empty((count, length), np.float32)
    bins = np.empty(count, np.int64)
    for i in range(count):
        f0 = float(np.exp(rng.uniform(np.log(60), np.log(1000))))
        weights = rng.uniform(0, 1, 8) / np.arange(1, 9)
        x = sum(
            w * np.sin(2 * np.pi * k * f0 * t + rng.uniform(0, 2 * np.pi))
            for k, w in enumerate(weights, 1)
            if k * f0 < rate / 2
        )
        x = x + rng.normal(0, 0.01, length)
        frames[i] = (x - x.mean()) / max(x.std(), 1e-10)
        bins[i] = int(round((1200 * np.log2(f0 / 10) - CREPE_FIRST_BIN_CENTS) / 20))
    return frames, bins


def _mel_filterbank(rate: int, n_fft: int, bands: int) -> np.ndarray:
    """[bands, n_fft // 2 + 1] triangular filters, equally spaced on the HTK mel scale, each
    normalized to unit area."""

    def mel(f):
        return 2595 * np.log10(1 + f / 700)

    edges = 700 * (10 ** (np.linspace(mel(0), mel(rate / 2), bands + 2) / 2595) - 1)
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    tri = np.maximum(0, np.minimum((freqs - lower) / (center - lower), (upper - freqs) / (upper - center)))
    return tri * (2 / (upper - lower))


def mel_frames(count: int, seed: int, frames: int = 160, bands: int = 40, rate: int = 16000) -> np.ndarray:
    """[count, frames, bands] float32 mel power spectrograms (25 ms Hann windows, 10 ms hop) of
    `audio_clips`, as Resemblyzer's encoder reads them (power, not log), each clip first made at
    least -30 dBFS loud as its preprocessing does (quieter ones are raised, louder ones kept)."""
    n_fft, hop = rate * 25 // 1000, rate * 10 // 1000
    clips = audio_clips(count, n_fft + hop * (frames - 1), seed, rate).astype(np.float64)
    rms = np.sqrt(np.mean(clips**2, axis=1, keepdims=True))
    clips *= np.maximum(1.0, 10 ** (-30 / 20) / np.maximum(rms, 1e-12))
    window = np.hanning(n_fft + 1)[:-1]
    index = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None, :]
    power = np.abs(np.fft.rfft(clips[:, index] * window, axis=-1)) ** 2
    return (power @ _mel_filterbank(rate, n_fft, bands).T).astype(np.float32)
