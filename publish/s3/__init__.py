"""The S3 wire: requests with deadlines, the one retry policy, XML bodies and SigV4 signing."""
