"""Scans and manifests: each sample's size (and frame count) from file headers, and its bucket.

* :mod:`~dataorder.diffusion.scan.files`: what the two scans share, finding files, reading them
  on a thread pool and reporting progress;
* :mod:`~dataorder.diffusion.scan.images`: :func:`scan_images`, image sizes from headers;
* :mod:`~dataorder.diffusion.scan.probe`: one video's size, frame count, rate and duration;
* :mod:`~dataorder.diffusion.scan.videos`: :func:`scan_videos` and :class:`VideoScan`;
* :mod:`~dataorder.diffusion.scan.manifest`: :class:`Manifest`, each sample's path, size and
  bucket id with the calculator behind them, and its file format.

A scan buckets what it reads with a calculator (:mod:`dataorder.diffusion.calculators`); the
samplers' datasets and statistics read the manifests (NOTE [ diffusion layers ] in
:mod:`dataorder.diffusion`). Nothing here imports torch; PyAV and Pillow are imported when a file
is read.
"""
