"""The model: what every later stage reads, built once and never changed.

`records` holds the records and enums the stages share (states, unit kinds, groups, findings),
`dump` what loading one rank gives (`RankDump`, its typed columns), `table` the one
`EntryTable` of every loaded rank's entries, `groups` the builder of the job's process groups
and their members (`GroupTable`), `ranks` the compact rank lists people read (`0-6,8-15`) and
`arrays` the numpy helpers the stages share. Nothing here imports a later stage.
"""
