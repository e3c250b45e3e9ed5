"""The core: the order as a pure function, and the rules every sampler shares. No torch here.

========================  ====================================================================
module                    what it is
========================  ====================================================================
``permutation``           a random-access keyed bijection of ``range(n)`` (O(1) memory)
``keys``                  64-bit keys from ``(seed, epoch, stream, purpose)``, never seed+epoch
``apportion``             exact, monotone, random-access shares of a stream among parties
``partition``             global blocks of ``per_rank x dp_size``, tails dropped or padded
``blockplan``             one epoch of global blocks filled by an order
``state``                 the checkpoint format: flat, versioned, strict, fingerprinted
``cursor``                the loop contract: epochs, ``len()``, resume, ``batch_at``
``topology``              where a process sits: a ``Topology`` value, detected at the edge
========================  ====================================================================
"""
