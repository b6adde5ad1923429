"""What remediate sends to other systems (chat, webhooks, Prometheus, Grafana), and how it is kept safe.

urls.py checks the URLs that are stored and shown (http(s), no credentials in them; a shown URL has its secrets
hidden); inert.py makes alert data inert text in each format people read (Slack mrkdwn, Teams markdown, HTML);
lazyhttp.py loads requests at a sender's first request (SessionSlot), and session.py is that session, reading
the environment's proxy and CA settings once.

May import: remediate.errors; nothing of a stage (actions, the executor's listeners, the server and the settings
all use it).
"""
