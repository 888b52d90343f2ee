"""What the algorithm experiments (`primitives`, `sizes`) share: which algorithms run on which
backends (`selection`) and the Python backend that times them as document 000 did (`python`)."""
