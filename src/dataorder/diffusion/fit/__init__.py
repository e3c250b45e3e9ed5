"""The fits: bucket sets chosen for a dataset and a job layout, the least loss under a waste budget.

* :mod:`~dataorder.diffusion.fit.images`: :func:`fit_to_data` and :class:`FitResult`, the image
  fit (NOTE [ waste telescopes ], NOTE [ dynamic G ]);
* :mod:`~dataorder.diffusion.fit.bins`: the images' aspect ratios binned exactly
  (NOTE [ exact bins ]);
* :mod:`~dataorder.diffusion.fit.candidates`: the candidate buckets, the input checks and the
  digests that identify the data a set was fitted to;
* :mod:`~dataorder.diffusion.fit.programme`: the exact programme that chooses the buckets and
  the thresholds;
* :mod:`~dataorder.diffusion.fit.chains`: its dynamic programme's passes over chains of buckets;
* :mod:`~dataorder.diffusion.fit.video`: :func:`fit_video_to_data` and :class:`VideoFitResult`,
  the video fit (NOTE [ video fit ]);
* :mod:`~dataorder.diffusion.fit.video_bands`: its bands of frame counts of one batch size;
* :mod:`~dataorder.diffusion.fit.video_classes`: its aspect classes and their options;
* :mod:`~dataorder.diffusion.fit.video_time`: its thresholds in time;
* :mod:`~dataorder.diffusion.fit.video_choice`: the sets it chooses between, the calculator's
  own among them (NOTE [ the preset is a candidate ]).

A fit imports only the bucket geometry (:mod:`dataorder.diffusion.buckets`), never a calculator:
what it needs of one (the class to build, the settings to keep) comes in as an argument, and the
calculators' ``fit_to_data`` pass themselves (NOTE [ diffusion layers ] in
:mod:`dataorder.diffusion`). Nothing here imports torch.
"""
