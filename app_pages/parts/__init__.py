"""Sections of the Load test page, a concept a module (what to send, the viewer's own limits, two servers, the
sweep); app_pages/load.py lays them out in order."""
