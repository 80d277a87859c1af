"""Run recipes that belong to one claim, one module per claim id (claims whose parts are glue have none)."""
