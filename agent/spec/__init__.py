"""From a request to a kernel spec, and reference problems for operations outside the catalog."""
