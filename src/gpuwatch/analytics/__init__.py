"""Pure analytics: frames in, frames out; no I/O, no clock, no config object."""
