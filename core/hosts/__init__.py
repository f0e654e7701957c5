"""Host access: the local machine or a host over SSH, files and processes there, and the programs gpuops sends to hosts."""
