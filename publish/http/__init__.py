"""The HTTP wire: connections and proxies, the HTTP/1.1 response reader, host lookup with a deadline, TLS
over _ssl, TLS trust and its cached hashed copy, and the network errors they raise."""
