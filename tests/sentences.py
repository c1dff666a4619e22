"""Twelve short English sentences: text data for the Hugging Face text models' tests."""

SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Benchmarks should compare like with like.",
    "Rain is expected in the afternoon.",
    "The meeting moved to Thursday.",
    "She plays the violin every evening.",
    "Quantization can change a model's answers.",
    "The train to the airport leaves at nine.",
    "He forgot his umbrella again.",
    "This soup needs more salt.",
    "The library opens at ten on Sundays.",
    "Stars are best seen far from city lights.",
]
