"""minirl"""
