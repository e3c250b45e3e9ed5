"""Bucket geometry: which buckets exist and which bucket a sample goes to. No sampler, no fit.

* :mod:`~dataorder.diffusion.buckets.lattice`: the lattice of bucket shapes and the shape that
  best serves a nominal aspect ratio;
* :mod:`~dataorder.diffusion.buckets.lookup`: vectorised, exact assignment by aspect ratio;
* :mod:`~dataorder.diffusion.buckets.cost`: :class:`CostModel`, batch sizes from a cost budget;
* :mod:`~dataorder.diffusion.buckets.crop`: resize an image to cover its bucket, then crop it;
* :mod:`~dataorder.diffusion.buckets.rules`: the :class:`BucketRule` protocol, the default rule,
  the rules ``compat=`` names and the pixel budget they share (NOTE [ Bucket rules ]);
* :mod:`~dataorder.diffusion.buckets.nemo_rule`: NeMo Automodel's bucket rule;
* :mod:`~dataorder.diffusion.buckets.fitted_rule`: a rule given its buckets and thresholds;
* :mod:`~dataorder.diffusion.buckets.points`: the checks of bucket lists and threshold pairs;
* :mod:`~dataorder.diffusion.buckets.video_frames`: the legal frame counts of video buckets;
* :mod:`~dataorder.diffusion.buckets.video_budget`: the token budget of a frame count and the
  generated video bucket set;
* :mod:`~dataorder.diffusion.buckets.video_presets`: named video model settings;
* :mod:`~dataorder.diffusion.buckets.video_assign`: vectorised assignment of clips;
* :mod:`~dataorder.diffusion.buckets.video_set`: a fitted video bucket set.

The bottom of diffusion's subpackages (NOTE [ diffusion layers ] in :mod:`dataorder.diffusion`):
it imports none of them. Nothing here imports torch.
"""
