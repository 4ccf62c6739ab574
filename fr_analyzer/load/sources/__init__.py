"""The sources wing of `load`: where the bytes come from.

A path or URL opened (`opening`) as a local directory (`base`, which also holds the types every
source shares), a tar or zip archive (`archives`) or an fsspec URL (`remote`); a running job asked
over its debug server (`live`); the rank files found in a source (`discovery`); and the files
beside the dumps that say where and when: the job's log (`joblogs`), times in file names
(`stamps`), the host of each rank (`hosts`), Python stacks (`pystacks`). Every read here stays
within `safety.limits`, and no module here turns bytes into objects but through `safety`.
"""
