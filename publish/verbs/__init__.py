"""The verbs: each module is one verb's flags and its ``run``, over the operations of publish.ops.

Each declares a ``COMMAND`` (a :class:`publish.ops.command.Command`: its synopsis, summary, typed flags and
``run``); publish.cli lists the modules and dispatches to them. No verb imports another.
"""
