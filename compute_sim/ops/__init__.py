"""The compute's side of each operation, one module per operation (as Nova's
``nova/conductor/tasks/`` keeps the conductor's): :mod:`.build`,
:mod:`.rebuild` (an evacuation's destination), :mod:`.resize`, :mod:`.live`
and :mod:`.destroy` (delete, shelve, reap). The manager's RPC methods
(:class:`compute_sim.manager.ComputeManager`) pass the guard, then hand
over to these; each step keeps its progress in the one step ledger
(:mod:`compute_sim.ledger`) and runs VMs only through the driver
(:mod:`compute_sim.driver`)."""
