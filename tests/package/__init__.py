"""The package as shipped: installation, the wings' layering, the bundled example, the notebook."""
