"""The formats wing of `load`: what the objects the door built mean, turned into the model.

`normalize` reads a dump's header and hands its entries to the fastest reader that takes them:
`columnar` (unpickled or parsed entries read one key at a time) or `careful` (entry by entry,
every problem named); what a reader raises when it does not read is in `outcomes`. `schema` is
the one table of an entry's keys, `values` reads single values, `blocks` finds coalesced and
batched blocks, `table` merges the ranks into one `EntryTable`. Dumps of other shapes are
rewritten into PyTorch's form: other recorders (`dialects`), torchft jobs' local ranks made
global (`torchft`, a rewrite of a dump's groups, as the dialects are), and Execution Traces
(`traces`).
"""
