"""What a trial watches and measures: the watched call, poison, layout, module state, clocks and the comparison with the fp64 reference."""
