"""What a trial watches and measures: the watched call, poison, module state, clocks and the comparison with the fp64 reference."""
