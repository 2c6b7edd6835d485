"""Alert delivery: the Prometheus exporter and its alert rules, and the webhook."""
