"""The benchmark suite: ``python -m bench`` (or ``tox -e bench``) writes bench/results/.

Cases (``--case``): ``engine`` (decisions in-process, memory and Redis
stores, against a naive Nova-style baseline), ``hostview`` (cold load and
change-stream catch-up), ``rabbit`` (select_destinations against a bare
oslo.messaging echo call), ``bootstorm`` (conductor, workers and compute
simulator end to end) and ``memory`` (worker resident size). ``--quick``
runs every case tiny, for the test that checks the output is well-formed.
Nothing here asserts a time: targets are reported as met or missed.
"""
