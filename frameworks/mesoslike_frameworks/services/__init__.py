"""The bundled service scheduler (``mesoslike services serve``): long-running
apps kept up, scaled and upgraded, behind Marathon's REST API (docs/services.rst).

Pure parts: :mod:`.model` (an app definition from Marathon's JSON, validated
field by field), :mod:`.core` (apps, instances, the launch queue, deployments:
events in, commands out), :mod:`.matching` (one offer against one instance,
and why not), :mod:`.api` (requests to answers over a core). Runtimes:
:mod:`.service` (the framework and its store), :mod:`.httpd` (the HTTP
server), :mod:`.client` (the CLI's client of the API).
"""
