"""What every folder may import: kgen's configuration, settings and the option table."""
