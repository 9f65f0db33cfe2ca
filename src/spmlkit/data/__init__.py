"""Datasets: named feature datasets (Yeast), feature folders written by ``spmlkit extract``,
the digits mosaic, images as the model sees them, and the image datasets' official layouts
read into spmlkit's prepared form (:mod:`spmlkit.data.formats`)."""
