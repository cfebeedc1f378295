"""The compressed model: surgery in memory, the forms' layers and maths, outputs written tensor by tensor."""
