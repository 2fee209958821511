"""HTTP routes: thin functions over the pipeline and the services."""
