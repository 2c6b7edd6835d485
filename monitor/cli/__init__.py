"""The front ends of the monitor's commands: `minirl analyze`, `import`, `export`,
`repair` and `prometheus-rules` (`minirl watch` lives in `monitor/watch/`)."""
