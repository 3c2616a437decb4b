"""The Protobuf contract shared by the ship client and the shore ingress.

`sync.proto` is the source; `sync_pb2.py` is generated from it and committed.
"""
