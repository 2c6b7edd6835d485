"""`minirl bench remediation`, `remediation-noise` and `remediation-pool`: the closed loop
measured in pairs (off/on), against chance (forks), and pooled over batches of seeds."""
