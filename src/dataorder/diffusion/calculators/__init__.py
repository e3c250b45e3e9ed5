"""The calculators: the public faces of the bucket sets, what a dataset and a manifest hold.

* :mod:`~dataorder.diffusion.calculators.image`: :class:`MultiTierBucketCalculator`, resolution
  buckets under a pixel budget and the bucket of every image (a preset, NeMo's or a fitted set);
* :mod:`~dataorder.diffusion.calculators.video`: :class:`VideoBucketCalculator`, video buckets
  over frames x height x width under a token budget (a preset or a fitted set).

A calculator holds one bucket rule (geometry, :mod:`dataorder.diffusion.buckets`) and builds its
fitted sets through the fit (:mod:`dataorder.diffusion.fit`), which takes the calculator as an
argument and never imports this package.
"""
