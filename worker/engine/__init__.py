"""The NBL engine: calibration statistics, scores, LMMSE maps, model surgery and saving.

Pure library code: nothing here imports the service. Heavy imports (torch, transformers) happen
when a submodule is imported, never at package import.
"""
