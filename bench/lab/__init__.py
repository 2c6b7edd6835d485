"""The stability lab (`minirl bench stability`) and the detection benchmark
(`minirl bench detection`): many `minirl train` runs, then reports read from their stores."""
