"""The bucket sampler: which bucket every step reads, every rank in lock-step, exact O(1) resume.

* :mod:`~dataorder.diffusion.sampler.table`: :class:`BucketTable`, which samples share a bucket;
* :mod:`~dataorder.diffusion.sampler.plan`: :func:`plan_bucket_epoch`, an epoch's runs of global
  batches, and the bucket order strategies (NOTE [ Bucket order strategies ]);
* :mod:`~dataorder.diffusion.sampler.batches`: what the sampler reads from a dataset, and what
  one of its batches is;
* :mod:`~dataorder.diffusion.sampler.nemo_order`: NeMo Automodel's sampler order
  (``compat="nemo"``);
* :mod:`~dataorder.diffusion.sampler.sampler`: :class:`BucketSampler` and
  :class:`SequentialBucketSampler`;
* :mod:`~dataorder.diffusion.sampler.dataset`: :class:`BaseMultiresolutionDataset`, samples
  grouped into buckets, from sizes, a manifest or a cache;
* :mod:`~dataorder.diffusion.sampler.stats`: what a bucket set does to a dataset on a job
  layout (crop and trim loss, waste), read from the sampler's plan.

The top of diffusion's subpackages (NOTE [ diffusion layers ] in :mod:`dataorder.diffusion`): it
may import all the others. Only :mod:`~dataorder.diffusion.sampler.sampler` and
:mod:`~dataorder.diffusion.sampler.dataset` import torch (they are a torch ``Sampler`` and
``Dataset``); NeMo's order imports it when it draws.
"""
