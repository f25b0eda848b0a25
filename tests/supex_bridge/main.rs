//! Integration tests: see the module files.
