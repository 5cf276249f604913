"""The tests, laid out as the package: `tests/<wing>/` tests that wing; `parity/`, `package/` cut across; `fixtures/` and `recorded/` serve them."""
