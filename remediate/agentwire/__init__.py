"""What both ends of an agent call share: the server's AgentRunner and the node's agent.

protocol.py (paths, request and answer shapes, error classes), auth.py (a node's credential derived from
the master token, request and answer signatures). Both sides import this package and never each other.

May import: errors only (kube, the runners, the server and the agent import it: it must stay below them).
"""
