"""What each kind of data fixes about a run (issue 66 item 5): one module per domain, named in
the registry (config/methods.py `DOMAINS`) and meeting contracts/method.py `DomainWiring`.

The launcher (simulation.py) asks a domain how many parties its data makes and whether the
data is there before anything starts; the ServerApp (server/app.py) asks it to fit the run to
the federation it meets and how many partitions the nodes must cover. A new domain is its own
module here plus its registry lines; neither caller names a domain.
"""
