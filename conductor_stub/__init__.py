import warnings

# oslo.messaging imports oslo.service, which imports eventlet; we never use
# eventlet (the threading executor serves RPC), so its deprecation notice on
# every start of every command is noise for operators.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
