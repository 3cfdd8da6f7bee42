"""The conductor's operations, one module each (as Nova's ``conductor/tasks/``)."""
