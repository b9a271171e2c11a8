"""One module per dataset format; :mod:`erag_dagster.data.loaders` dispatches a spec to them.

Each format module offers ``<format>_files(...)``: the files its loader reads (checked to
exist), and ``load_<format>(...)``: the :class:`~erag_dagster.data.schema.Dataset` read from
exactly those files. The shared record reading and checks live in :mod:`.records`.
"""
