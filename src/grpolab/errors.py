"""The one exception type that the command line turns into a clean message instead of a traceback.

A ``UserError`` says what is wrong and how to fix it. Library functions that validate user input raise
``ValueError`` (or a subclass, such as this one) with the same kind of message.
"""


class UserError(ValueError):
    """Bad input, config or file: the message names the problem and the fix."""
