"""The bottom layer: formats several processes share (the commit note, the port table, Kafka
client security, bounded JSON, the sealed OTP code).  Imports nothing of the project."""
