"""The whole system in one process: the layer above the three services.

``scheduler-demo`` (:mod:`allinone.demo`) runs a scheduler worker, the
conductor and a compute simulator together, so it imports all three
packages; it lives here so that none of them imports another's top
(``scheduler`` imports neither ``conductor_stub`` nor ``compute_sim``; the
import contracts in ``setup.cfg`` say so).
"""
