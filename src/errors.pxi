# Turning a cursor failure into the package's DecodeError (GIL held).

from pgoutput_fast.errors import DecodeError


cdef inline str _type_char(int t):
    return None if t < 0 else chr(t)


cdef int raise_cursor_error(Cursor *c, int msg_type, object message_index=None) except -1:
    cdef str reason = (<bytes>c.err_reason).decode("utf-8") if c.err_reason != NULL else "bad input"
    if c.err_need >= 0:
        reason = f"{reason}: need {c.err_need} bytes at byte {c.err_offset}, {c.len - c.err_offset} left"
    raise DecodeError(reason, c.err_offset, _type_char(msg_type), message_index)


cdef int raise_decode_error(str reason, Py_ssize_t offset, int msg_type,
                            object message_index=None) except -1:
    raise DecodeError(reason, offset, _type_char(msg_type), message_index)
