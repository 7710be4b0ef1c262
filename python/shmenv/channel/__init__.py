"""The call side channel between the trainer and each worker process: a private Unix socket
per worker (made by the engine before it spawns the worker), over which the trainer calls
into the hosted Python envs (``call``/``get_attr``/``set_attr``, reset options, infos, side
leaves) without touching the step path, which goes through shared memory only.

- :mod:`shmenv.channel.protocol`: the framing and the op names, both ends' one definition;
- :mod:`shmenv.channel.trainer`: the trainer's end (:class:`~shmenv.channel.trainer.CallChannel`);
- :mod:`shmenv.channel.worker`: the worker's end (the thread that serves the requests).

Importing this package imports none of them: a worker process loads its end only.
"""
