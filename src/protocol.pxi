# The bytes of the pgoutput protocol that the core dispatches on (docs/protocol.md): the
# message type (a message's first byte) and the markers inside a change's TupleData.
# Every comparison with one of these bytes in src/ goes through these names.

cdef enum MsgType:                 # first byte of a pgoutput message
    MSG_BEGIN = 66                 # 'B'
    MSG_COMMIT = 67                # 'C'
    MSG_ORIGIN = 79                # 'O'
    MSG_RELATION = 82              # 'R'
    MSG_TYPE = 89                  # 'Y'
    MSG_INSERT = 73                # 'I'
    MSG_UPDATE = 85                # 'U'
    MSG_DELETE = 68                # 'D'
    MSG_TRUNCATE = 84              # 'T'
    MSG_MESSAGE = 77               # 'M' (logical decoding message)
    MSG_STREAM_START = 83          # 'S'
    MSG_STREAM_STOP = 69           # 'E'
    MSG_STREAM_COMMIT = 99         # 'c'
    MSG_STREAM_ABORT = 65          # 'A'
    MSG_BEGIN_PREPARE = 98         # 'b'
    MSG_PREPARE = 80               # 'P'
    MSG_STREAM_PREPARE = 112       # 'p'
    MSG_COMMIT_PREPARED = 75       # 'K'
    MSG_ROLLBACK_PREPARED = 114    # 'r'


cdef enum TupleByte:               # markers inside Insert / Update / Delete
    TUPLE_NEW = 78                 # 'N' the new tuple follows
    TUPLE_KEY = 75                 # 'K' the old tuple is the replica identity key
    TUPLE_OLD = 79                 # 'O' the old tuple is the whole old row
    COL_NULL = 110                 # 'n' a TupleData column: SQL NULL
    COL_TOAST = 117                # 'u' unchanged TOASTed value (not sent)
    COL_TEXT = 116                 # 't' text-format value
    COL_BINARY = 98                # 'b' binary-format value
