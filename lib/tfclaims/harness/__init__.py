"""Running claims: the experiment interface, registry, the code a run reaches, provenance, runner,
launchers."""
