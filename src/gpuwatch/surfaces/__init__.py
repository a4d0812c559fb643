"""What users and tools read: the report and its renderings, the FOCUS export, the HTTP API's and
the CLI's report path, `gpuwatch check` and the Prometheus exporter."""
