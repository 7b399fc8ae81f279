"""The registry's resources, one module each, as Confluent's REST API groups them."""
