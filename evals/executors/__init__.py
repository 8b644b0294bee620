"""Where evaluations run: every GPU of this host, or a Ray cluster, behind one interface.

``interface.py`` says what an executor is; ``local.py`` and ``ray_lanes.py`` are the two;
``lane.py`` is what runs on one GPU whichever executor started it; ``dispatch.py`` spreads
jobs over lanes and retries a job whose lane was lost; ``session.py`` keeps the executor a
kgen process uses.
"""
