"""Built-in suite files (default, quick, full): TOML, read by pqlab.suite."""
