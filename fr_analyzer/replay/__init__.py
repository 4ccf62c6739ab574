"""`fr-analyze replay`: run a recorded collective sequence again with torch.distributed, to
tell a program bug (it stops anywhere) from a machine or network fault (it runs elsewhere).

`plan` turns a loaded job into what every rank replays (records only, no torch), `worker` runs
one rank of a plan (the only module that imports torch), `runner` starts the ranks and bounds
them in time, and `results` sums up their timings. The CLI prints; nothing here does.
"""
