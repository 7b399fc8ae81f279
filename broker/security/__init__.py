"""TLS, SASL and ACLs on the broker's listeners (broker/listeners.py): who may connect and
what each principal may do."""
