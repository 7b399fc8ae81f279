"""Listeners, TLS, SASL and ACLs: who may connect and what each principal may do."""
